"""Sensors: processes that tell the rounds where to look (SMB change notifications)."""
