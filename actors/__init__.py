"""Ray actors: thin shells (actors/group.py) around plain worker classes."""
