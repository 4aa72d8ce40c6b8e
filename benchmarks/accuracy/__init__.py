"""Accuracy entry points: models trained under a stated budget and evaluated, zero-shot included."""
