"""Templates shared by the rules (annotations) and the notifiers (`title`/`text`): Jinja2 in a sandbox.

Pure, like the core it serves: no I/O, no clock reads. `env` is the one environment every template compiles
in, `funcs` the Prometheus template functions, `annotations` the rules' annotation templates and
`notifications` the notifiers' templates over a notification's data.
"""
