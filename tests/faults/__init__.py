"""Tests of the engine under injected faults: kills, locks, links, races, bad data, tracebacks."""
