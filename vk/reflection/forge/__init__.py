"""Pure forging: remote objects built from local ones and back, on the API's own JSON.

Nothing here does I/O, so every rule of reflection is testable with plain tables (as in Liqo's
`pkg/virtualKubelet/forge`).
"""
