"""What a finished study hands on: the winning runtime config in the forms other tools read."""
