"""`mascot web`: the local web app (group chat and the blinded human study)."""
