"""primus.data: the data client a user training loop iterates, and the feed, cursors and mixer the trainer shares with it."""
