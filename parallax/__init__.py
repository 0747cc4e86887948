"""Parallax's library: everything below the driver (`orchestrator`), its actors (`actors`), the rewards
(`rewards`) and the curricula (`curricula`), under one import root so that nothing generic lands in a
user's site-packages. docs/architecture.md lists what each package holds and the floor it sits on."""
