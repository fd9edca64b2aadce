"""The hub of a measuring run: the options, the mode each measurement goes through, the
recorded run."""
