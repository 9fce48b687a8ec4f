"""Run directories for the tests: the files pe-train leaves, written without training."""
import pickle
import zipfile


def stand_in_checkpoint(path, updates: int) -> None:
    """A file laid out as torch.save lays out a fairseq checkpoint (a zip archive holding ARCHIVE/data.pkl) with
    only the update count, in its last optimizer_history entry: what checkpoint_files.updates_of reads."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"optimizer_history": [{"num_updates": updates}]}))
