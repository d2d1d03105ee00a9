"""The web view and Kueue's visibility API, served from a read-only follower of the log."""
