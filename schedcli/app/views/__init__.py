"""What the commands show, shared by them: tables (``render``), ``--check`` differences
(``check_views``), ``replay -f`` outputs and goldens, and progress on a terminal."""
