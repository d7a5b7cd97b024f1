"""Documents every API of ``encdec serve`` translates: ``formats`` reads a .txt, .html, .docx or .odt file's texts
within bounds and writes the file again with their translations; ``worker`` does it for .docx and .odt in worker
processes. Kept light: importing this folder loads no model library."""
