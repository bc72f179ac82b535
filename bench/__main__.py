"""python -m bench [--short]: see bench/config.py for the flags."""

from .config import parse_args
from .run import main

main(parse_args())
