"""PULL_MESSAGE (11): long polling, tag filtering, the piggy-backed commit offset."""
