"""Speed and memory entry points: time and peak memory of meshop's layers and models, against the
dense form of the papers' code where there is one."""
