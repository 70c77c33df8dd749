"""What a person sets up: the topology, the device and link catalogue, the model presets, the names and labels, and the Scenario that holds them."""
