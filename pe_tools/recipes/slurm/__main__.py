"""``python -m pe_tools.recipes.slurm job ...``: what each batch script of pe-queue run --slurm runs on a node
(job.main). The module path stays the one the batch scripts name, those of copies pinned before it was a package
too."""
import sys

from .job import main

if __name__ == "__main__":
    sys.exit(main())
