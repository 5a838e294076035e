"""Diagnose a hung or failed distributed job: the odd rank, the failure class, the evidence.

evidence.py  the typed evidence collectors fill (RankEvidence, JobEvidence)
sources.py   saved files -> evidence (`hc diagnose logs`)
stacks.py    STAT-like grouping of the ranks' stacks
classify.py  the ordered rules -> findings
verdict.py   findings -> the Verdict (table, hc.diagnosis/1 JSON)
"""
