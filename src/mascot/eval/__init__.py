"""`mascot eval`: systems as data, their runs on the same contexts and seeds, and the paper's tables."""
