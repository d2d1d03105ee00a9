"""The admission webhooks: a wing of its own, knowing the others only through ``events``."""
