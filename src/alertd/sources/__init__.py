"""Sources: each polls one kind of data and returns normalised samples."""
