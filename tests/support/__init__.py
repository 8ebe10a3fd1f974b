"""What the tests share besides fixtures: helpers, users' jobs, private servers, attackers."""
