"""The lint gate of make check (gate.py) and the upstream settings it applies (settings.toml)."""
