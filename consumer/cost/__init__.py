"""What judging costs, and what is left unjudged to save it: sampling, filters, the answer
cache, prices."""
