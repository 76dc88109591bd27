"""Long runs of the daemon (minutes each): memory flat over time, under attack, beside admin churn."""
