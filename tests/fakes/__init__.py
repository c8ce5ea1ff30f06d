"""What tests build instead of a real machine or a real install: site-packages laid out as pip lays
them out, and the like. Test modules import from here, never from one another."""
