"""The two ways a template fails: refused when it is loaded, or failing while it renders."""


class CheckError(ValueError):
    """A template refused at load: the message names the template's line and column."""


class RenderError(Exception):
    """A template failed while rendering (a missing name, a refused operation, a bad value)."""
