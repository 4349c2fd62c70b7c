"""Trainer callbacks that record a run for alertd and stop it with a checkpoint when alertd asks.

    from alertd.integrations.transformers import AlertdCallback   # Hugging Face Trainer
    from alertd.integrations.lightning import AlertdCallback      # Lightning

Each writes the raw per-step training loss and gradient norm (before any NaN filtering), `run.started`,
`run.finished` / `run.crashed` and `run.stopped` to a JSON-lines file in the format of alertd's `samples`
source, and honours a stop request (alertd's `stop_file` notifier, or SIGINT / SIGUSR1 as its `kill`
notifier sends) by saving a checkpoint at the next step boundary and ending training cleanly.

Nothing here imports a framework until its own module is imported: `samples_writer`, `stop` and `recorder`
need only the standard library, and both callback modules import without their framework installed (the
callback then refuses to be created, with an ImportError naming the package).
"""
