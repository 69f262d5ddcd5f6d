"""The course itself: where files live, the environment, the data sets, parity checks and notebook display."""
