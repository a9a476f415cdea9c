"""The chapters' experiments, and what each chapter claims from them.

``claims``: the records of the sweeps over seeds (``make claims``), the floor
rule, and what the prose and the asserts read from them. ``provenance``: the
fingerprint of the code a measurement came from. ``<chapter>``: what that
chapter claims (``CLAIMS``), beside the code of its experiment.
"""
