"""Pure cost models, no processes: the operator graph, the datasheet cost, placement, collective schedules and their alpha-beta times, load balancing."""
