"""The blinded human preference study: build it from two systems' episodes, collect ratings in
SQLite, compute the results. Nothing here imports FastAPI (the pages are in `mascot.web.study_routes`)."""

METRICS = ("helpfulness", "emotional_appropriateness", "perceived_safety")
METRIC_LABELS = {
    "helpfulness": "Helpfulness",
    "emotional_appropriateness": "Emotional appropriateness",
    "perceived_safety": "Perceived safety",
}
CHOICES = ("a", "b", "tie")
