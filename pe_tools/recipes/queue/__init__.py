"""pe-queue: a list of trainings that survives interruption. Each run is trained (pe-train), decoded twice (the
average of the last checkpoints and the last checkpoint alone, pe-generate) and recorded (pe-record) when it has
reached its last update; up to ``-j`` runs at a time.

    pe-queue run QUEUE [-j N] [--threads 1] [--pin REV | --code DIR]
    pe-queue run QUEUE --slurm [--partition P] [--account A] [--time LIMIT] [--gpus N] [--cpus N] [--nodes N]
                               [--sbatch ARG] [--signal-seconds S] [--dry-run]     (docs/cluster.md)
    pe-queue run QUEUE --rehearse DIR [--slurm ...]   (each run at size tiny-cpu on a synthetic corpus: a rehearsal)
    pe-queue status QUEUE
    pe-queue check QUEUE [--no-data]
    pe-queue cancel QUEUE

``status``: one row per run (updates, validation loss, time per update, finish); under the table, each run whose
last step failed, with the log to read (on SLURM, each FAILED or DIED job's reason, docs/cluster.md).

QUEUE is a plain text file, one run a line: ``RECIPE METHOD PAIR SIZE SEED`` and optionally ``data=DIR``,
``runs-dir=DIR`` and ``into=DIR`` (pe-train's --data and --runs-dir, pe-record's --into), a value with spaces
quoted; ``#`` outside quotes starts a comment.
Every line is checked before anything starts (the recipe, method, pair, size, seed and the prepared data: both
languages' dict.LANG.txt), and the error names every bad line and its fix.

Interruption: the queue can be killed at any moment, SIGKILL included, and restarted with the same command. On
start it ends the trainings a killed queue left running (their process groups are listed in QUEUE.pids), repairs
each run directory (fairseq copies checkpoint_last.pt from the newest numbered checkpoint by a plain copy, so a kill
during that copy leaves it truncated: it is replaced by the newest numbered checkpoint that reads whole) and resumes
each unfinished run from its checkpoint_last.pt; at most the updates since the last checkpoint are lost. A run is
decoded and recorded only once it has reached its --max-update, and every file a later step reads is written under a
temporary name and renamed when whole.

Pinned code: the runs train from a copy of one commit (``--pin REV``, default HEAD, exported with git archive
outside the working tree, under $PE_QUEUE_CODE_ROOT or ~/.cache/pe_plugin/code/COMMIT), or from ``--code DIR`` (a
copy made beforehand; its COMMIT file names the commit). Changes to the working tree while the queue runs do not
reach its runs. The commit goes into each run's command.json, and a run begun by other code is refused, not
resumed: a run's recorded commit is the code that trained all of it.
"""
# the queue's names, for pe-queue, its SLURM side and the scripts that run queues
from .chain import (  # noqa: F401
    DECODES, decoded, finished_run, max_update, readable, recorded_commit, repair, run_chain, saved_update)
from .file import COUNTS, OPTIONS, QueueError, Run, data_needed, missing_dicts, parse_queue  # noqa: F401
from .local import CHAIN_WAIT, COMMIT_ENV, Queue  # noqa: F401
from .pin import CHECKOUT, code_commit, code_root, pin_code  # noqa: F401
from .rehearse import REHEARSAL_CORPUS, REHEARSAL_SIZE, REHEARSE_ENV, rehearsal, synthetic_data  # noqa: F401
from .status import failed_step, progress, status_table  # noqa: F401
