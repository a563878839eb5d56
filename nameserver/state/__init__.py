"""Shared machinery of the state machine: the state machine, the composite image and delta, map/delta machinery, consistency, snapshots of the image, leader duties."""
