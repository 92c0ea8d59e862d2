"""Tests of the benches' and drivers' own logic (argument checks, tables, fake servers), no GPU."""
