"""Templates shared by the rules (annotations) and the notifiers (`title`/`text`): Jinja2 in a bounded sandbox.

Pure, like the core it belongs to: no I/O, no clock reads. What uses it:

- `annotations`: the rules' annotation templates (`parse_template`, `Template`);
- `notifications`: the notifiers' templates over a notification's data (Alertmanager's names);
- `compiled`: `compile_template` checks and compiles any template, `Compiled.render` renders it;
- `direct`: a template of text, names, `labels.NAME` and `{% if %}` on them (most annotations) rendered without
  Jinja's runtime, printing what Jinja prints;
- `errors`: `CheckError` (refused at load) and `RenderError` (failed while rendering);
- `labels`: labels as a template sees them (`LabelView`, a missing one printing `MISSING`).

How: `env` is the one sandboxed environment; `gospell` rewrites the Prometheus (Go) spellings, `check` refuses
what a template may not do at load, `bounds` limits what a render may do, `filters` holds alertd's filters and
`funcs` the Prometheus template functions. `jinja_compat` is the only module that uses Jinja2's private or
undocumented API (its docstring says which names and why; `tests/core/test_jinja_version.py` watches them).
"""
