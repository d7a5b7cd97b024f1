"""Documents every API of ``encdec serve`` translates: ``formats`` reads a .txt, .html, .docx or .odt file's texts
within bounds and writes the file again with their translations; ``runs`` writes a .docx or .odt paragraph's runs
as markup and makes the translated markup into runs again; ``worker`` reads and writes .docx and .odt in worker
processes. Kept light: importing this folder loads no model library."""
