"""Routing, silences, inhibition, grouping and repeat (pure planning), then the durable delivery pipeline.

Pure: `matchers` (label matchers, `Silence`), `routes` (`Route`, `InhibitRule`, defaults), `plan`.
Adapters: `outbox` (SQLite outbox + notification log), `silences` (`SilenceStore`), `pipeline`
(retrying delivery), `dispatcher` (the facade the app uses), `codec` (JSON form of notifications).
"""
