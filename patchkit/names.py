"""The one project-name normaliser (PEP 503): 'Flash_Infer.Python' and 'flashinfer-python' name one package."""
from __future__ import annotations

import re


def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
