# pyright reads this in place of transformers' own package (see pyproject.toml's [tool.pyright]): binding its
# __init__, which imports every model it ships, took 16 of pyright's 63 s. Every name is Any, as most of
# transformers' own annotations already resolve to.
from typing import Any

def __getattr__(name: str) -> Any: ...
