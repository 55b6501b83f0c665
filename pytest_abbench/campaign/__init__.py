"""What a campaign file declares (ops, shapes, the switch), how it is loaded, and the client adapters (FlagGems).

Imported inside cells: nothing here imports pytest.
"""
