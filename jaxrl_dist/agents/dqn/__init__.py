"""DQN with a replay buffer sharded over a FIXED number of shards (see :mod:`.replay`)."""
