"""pe-queue on a SLURM cluster: each run of a queue file as one SLURM job (a job array per resource shape), running
the local queue's own chain (train -> decode twice -> record, ``queue.Queue.process``) from the pinned copy of the
code; several ranks of one run started with srun; the jobs' state kept in their run directories. docs/cluster.md
is the user's guide.

    pe-queue run QUEUE --slurm [--partition P] [--account A] [--time T] [--gpus N] [--cpus N] [--nodes N]
                               [--sbatch ARG ...] [--signal-seconds S] [--dry-run]
    pe-queue status QUEUE          (SLURM columns: job id, state, requeues)
    pe-queue cancel QUEUE          (scancel of this queue's jobs, nothing else)

Submission writes QUEUE.slurm/ beside the queue file: a copy of the queue file named by its content (the jobs read
that copy, so an edit to QUEUE does not reach submitted jobs), one batch script per job array, logs/ (SLURM's
output of each job, appended across restarts) and jobs.json (every id ever submitted and the name it was submitted
under, which status and cancel read). A job's name holds a key of its submission (``query.queue_key``): an id
counts as this queue's only while SLURM lists it under that name, so an id SLURM gives again to another job is not
ours.
One submitter per run: submitting locks the queue and each run directory around "look for a live job, submit,
record the id" (pe_tools/locks.py), and a job that finds its run directory in use by another live job leaves it
(``job.claim``), or waits when the holder is its own array task's earlier processes.

Batch scripts are written here, not through submitit: a batch script is a file the user can read, resubmit and
adapt, and the traps of submitit on clusters without accounting (states read UNKNOWN, waits on jobs cancelled
from outside, SIGTERM ignored) do not arise: each job writes its own state into RUN/slurm.json.

Preemption and time limits: every job asks for ``--requeue --open-mode=append --signal=B:USR1@S``. On USR1 (S
seconds before its time limit) the job requeues itself (``scontrol requeue`` of its own array task,
``job.job_task``: the array's id would requeue every task of the array); SLURM then ends its processes and starts it
again, as it does after a preemption or an outside ``scontrol requeue``. A restarted job runs the same
chain: the queue's repair makes checkpoint_last.pt the newest checkpoint that reads whole, pe-train resumes from it
(train.log appended), a finished run is not trained again, and decoding and recording happen only at the last
update. A run loses at most the updates since its last checkpoint. A --time that leaves no training time after the
signal is refused (``options.check_time``, in SLURM's whole minutes), and a job started MAX_STALLED_STARTS times in
a row on the same checkpoint ends FAILED. The job's states, their transitions and the status word
(``status.status_columns``) are state.py's.

The modules, each importing only from those above it in this list (tests/test_structure.py checks it):
    state.py    the job as a state machine: SLURM's states, the job's own words and their one table of transitions,
                the status word (standard library only)
    files.py    RUN/slurm.json, the run directory's locks, QUEUE.slurm/ (jobs.json, scripts, logs)
    options.py  pe-queue's SLURM options, each run's shape, the checks of --time
    query.py    the questions to SLURM: the cluster's size, the jobs' states (squeue, sacct)
    submit.py   pe-queue run --slurm and pe-queue cancel
    status.py   pe-queue status's SLURM columns
    job.py      the job on its node (``python -m pe_tools.recipes.slurm job``, __main__.py)
"""
