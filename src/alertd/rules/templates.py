"""Moved to `alertd.templating.annotations`: these names stay here only for the rules file loader's import
(`alertd.config.rulesfile`); delete this module once it imports them from `alertd.templating.annotations`."""

from alertd.templating.annotations import MISSING, NAMES, Template, TemplateError, parse_template

__all__ = ["MISSING", "NAMES", "Template", "TemplateError", "parse_template"]
