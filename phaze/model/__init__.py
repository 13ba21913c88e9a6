"""The model: one training point's evaluation (layer times, placement, score), its context,
bounds and knob search, and serving (steady state, under load, capacity), as pure functions
of their inputs. The sweep, the API, validation and the CLI build on it; it imports none of
them."""
