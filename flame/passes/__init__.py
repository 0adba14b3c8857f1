"""Graph -> Graph passes, one per file, named by their verb."""
