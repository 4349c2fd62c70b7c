"""Runs and the processes behind them.

- `tracker`: the run tracker, pure (no I/O, time an argument): each run's state and how it ended;
- `writers`: which process writes a run's event files, verified through /proc;
- `procfs`: reading process facts from /proc;
- `eventnames`: what a TensorBoard event file's name claims (host, pid);
- `slurmjobs`: Slurm's job records (`squeue --json`) read as jobs.

Nothing is re-exported here: importing the pure tracker never loads the modules that read /proc.
"""
