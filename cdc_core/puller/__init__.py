"""The log puller: subscribes key spans on the upstream's region feeds and yields ordered row events."""
