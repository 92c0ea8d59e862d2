"""What travels to an air-gapped GPU machine beside the checkout: one checked, compressed payload (carry) and a
Triton release packed small (carry_triton), each installed there only after every byte matches its manifest."""
