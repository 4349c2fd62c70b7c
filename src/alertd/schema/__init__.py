"""The building blocks of every model of the rules files: `types` (`Strict`, `Duration`, `redacted`), `secretfiles`
(`<key>_file` secrets), `httpauth` (`basic_auth`, `tls`). The sources', notifiers', actions' and routes' own models
use them, and `alertd.config` puts those models together into a rules file."""
