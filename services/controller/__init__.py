"""The controller: election, replica assignment, leader election, topic lifecycle."""
