"""Synthetic parallel corpora for the tests, the quick start, the demo and the length experiment: toy (the
target is the source reversed and upper-cased) and grammar (an English -> German-like grammar that needs word
order). Standard library only."""
