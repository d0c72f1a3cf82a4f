"""Timer engines: the ``TimerStore`` protocol, its implementations and the deliverer."""
