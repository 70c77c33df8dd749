"""Jobs on the class server: the manager, queue and placement policies, the submit guard, and comparisons."""
