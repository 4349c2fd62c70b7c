"""Notifiers: each delivers a Notification to one kind of receiver."""
