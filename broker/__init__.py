"""Quorum-write RocketMQ broker (a later issue)."""
