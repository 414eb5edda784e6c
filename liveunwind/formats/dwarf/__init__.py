"""The DWARF reads behind --lines: attribute forms, units and inline scopes, line tables,
.debug_aranges.
"""
