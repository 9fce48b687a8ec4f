"""pe_tools/recipes/training_log.py, the one reader of fairseq-train's progress lines, on lines fairseq 0.12 wrote
(a tiny training logged twice, with --log-format simple and json, its numbers read off the lines by hand)."""
import pytest

from pe_tools.recipes import training_log

SIMPLE = """\
2026-11-26 09:08:50 | INFO | fairseq_cli.train | {'_name': None, 'common': {'log_format': 'simple'}}
2026-11-26 09:08:51 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 5.068 | nll_loss 4.864 | ppl 29.13 | wps 0 | wpb 135 | bsz 24 | num_updates 5
2026-11-26 09:08:52 | INFO | train | epoch 001 | loss 5.737 | nll_loss 5.628 | ppl 49.44 | wps 1459.1 | ups 4.11 | wpb 363.2 | bsz 59.2 | num_updates 5 | lr 0.003 | gnorm 1.689 | train_wall 1 | wall 9
2026-11-26 09:08:52 | INFO | train_inner | epoch 002:      5 / 5 loss=5.396, nll_loss=5.237, ppl=37.72, wps=1811.3, ups=5.04, wpb=363.2, bsz=59.2, num_updates=10, lr=0.003, gnorm=1.501, train_wall=1, wall=10
2026-11-26 09:08:53 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 4.739 | nll_loss 4.463 | ppl 22.06 | wps 0 | wpb 135 | bsz 24 | num_updates 10 | best_loss 4.739
2026-11-26 09:08:53 | INFO | train | epoch 002 | loss 5.056 | nll_loss 4.847 | ppl 28.77 | wps 1717.1 | ups 4.73 | wpb 363.2 | bsz 59.2 | num_updates 10 | lr 0.003 | gnorm 1.312 | train_wall 1 | wall 10
2026-11-26 09:08:52 | INFO | fairseq.trainer | Saving checkpoint to ck/checkpoint_last.pt
"""
JSON = """\
2026-11-26 09:09:35 | INFO | valid | {"epoch": 1, "valid_loss": "5.068", "valid_nll_loss": "4.864", "valid_ppl": "29.13", "valid_wps": "0", "valid_wpb": "135", "valid_bsz": "24", "valid_num_updates": "5"}
2026-11-26 09:09:35 | INFO | train | {"epoch": 1, "train_loss": "5.737", "train_nll_loss": "5.628", "train_ppl": "49.44", "train_wps": "1317.9", "train_ups": "3.71", "train_wpb": "363.2", "train_bsz": "59.2", "train_num_updates": "5", "train_lr": "0.003", "train_gnorm": "1.689", "train_train_wall": "1", "train_wall": "10"}
2026-11-26 09:09:37 | INFO | train_inner | {"epoch": 2, "update": 2.0, "loss": "5.396", "nll_loss": "5.237", "ppl": "37.72", "wps": "1111.9", "ups": "3.09", "wpb": "363.2", "bsz": "59.2", "num_updates": "10", "lr": "0.003", "gnorm": "1.501", "train_wall": "3", "wall": "12"}
2026-11-26 09:09:37 | INFO | valid | {"epoch": 2, "valid_loss": "4.739", "valid_nll_loss": "4.463", "valid_ppl": "22.06", "valid_wps": "0", "valid_wpb": "135", "valid_bsz": "24", "valid_num_updates": "10", "valid_best_loss": "4.739"}
2026-11-26 09:09:37 | INFO | train | {"epoch": 2, "train_loss": "5.056", "train_nll_loss": "4.847", "train_ppl": "28.77", "train_wps": "832.7", "train_ups": "2.29", "train_wpb": "363.2", "train_bsz": "59.2", "train_num_updates": "10", "train_lr": "0.003", "train_gnorm": "1.312", "train_train_wall": "2", "train_wall": "12"}
2026-11-26 09:09:44 | INFO | fairseq_cli.train | done training in 10.5 seconds
"""
# (kind, num_updates, loss, nll_loss, best_loss) of the five progress lines, as both logs print them
EXPECTED = [("valid", 5, 5.068, 4.864, None), ("train", 5, 5.737, 5.628, None), ("train_inner", 10, 5.396, 5.237, None),
            ("valid", 10, 4.739, 4.463, 4.739), ("train", 10, 5.056, 4.847, None)]


@pytest.mark.parametrize("log", [SIMPLE, JSON], ids=["simple", "json"])
def test_both_formats_read_alike(log):
    got = [(r.kind, r.updates, r.get("loss"), r.get("nll_loss"), r.get("best_loss")) for r in training_log.records(log)]
    assert got == EXPECTED
    assert training_log.last_update(log) == 10
    assert [r.subset for r in training_log.records(log, "valid")] == ["valid", "valid"]


def test_a_resumed_log_in_both_formats():
    """A run recorded in the simple format and resumed with json: one sequence; a repeated validation keeps the last."""
    resumed = SIMPLE + JSON.replace('"valid_loss": "4.739"', '"valid_loss": "4.7"')
    assert [(v.updates, v.get("loss")) for v in training_log.validations(resumed)] == [(5, 5.068), (10, 4.7)]
    assert len(training_log.records(resumed, "train_inner")) == 2


def test_other_lines_and_broken_json_are_skipped():
    noise = ("2026-11-26 09:08:52 | INFO | train | no epoch here\n"
             "2026-11-26 09:08:52 | INFO | valid | {\"epoch\": 1, \"valid_loss\": \n"
             "2026-11-26 09:08:52 | INFO | fairseq.tasks | {\"x\": 1}\n"
             "epoch 001 | valid on 'valid' subset | loss 1 | num_updates 3\n")  # no timestamp: not fairseq's logger
    assert training_log.records(noise) == [] and training_log.last_update(noise) is None
